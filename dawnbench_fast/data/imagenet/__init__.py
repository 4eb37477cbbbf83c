"""The ImageNet input pipeline: the ImageFolder layout, JPEG decoding,
random-resized crops and the loader that turns them into uint8 batches."""

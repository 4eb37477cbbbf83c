"""What the tests share: data locations, fakes, fixtures and the torchrun drivers."""

"""From flags to a resolved config: ``--set name=value`` for any dataclass
(overrides.py), ``--config FILE`` (config_file.py), and ``--precision auto``
from the machine's features (precision.py)."""

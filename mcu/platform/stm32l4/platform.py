from platformio.public import PlatformBase


class Tinyolstm32l4Platform(PlatformBase):
    """Offline dev-platform: everything it needs is in this directory or on PATH."""

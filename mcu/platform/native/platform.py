from platformio.public import PlatformBase


class TinyolnativePlatform(PlatformBase):
    """Offline dev-platform for the host build of the firmware."""

    def is_embedded(self):
        return False

"""tinyol: on-device learning for STM32L4 microcontrollers."""

__version__ = "0.1.0"

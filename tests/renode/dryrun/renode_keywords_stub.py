"""Dry-run stand-ins for the Renode keywords tests/renode/tinyol.robot uses.

Renode provides these keywords itself (src/Renode/RobotFrameworkEngine in the Renode
sources) when the suite runs under `renode-test`. This library only lets
`robot --dryrun` resolve their names and check the arguments we pass; the signatures
follow Renode's (RenodeKeywords.cs, UartKeywords.cs). Running any of them fails on
purpose: a real run needs renode-test.
"""
from __future__ import annotations

ROBOT_LIBRARY_SCOPE = "GLOBAL"

_MESSAGE = "Renode keyword stub: run tests/renode/tinyol.robot with renode-test, not robot"


def execute_command(command, machine=None):
    """Renode: run one Monitor command."""
    raise RuntimeError(_MESSAGE)


def create_terminal_tester(uart, prompt=None, timeout=30, machine=None):
    """Renode: attach a line tester to a UART peripheral (e.g. sysbus.usart2)."""
    raise RuntimeError(_MESSAGE)


def start_emulation():
    """Renode: start every machine."""
    raise RuntimeError(_MESSAGE)


def wait_for_line_on_uart(content, timeout=None, testerId=None, treatAsRegex=False):
    """Renode: wait until the tester's UART prints a line containing (or matching) `content`."""
    raise RuntimeError(_MESSAGE)


def reset_emulation():
    """Renode: drop all machines (renode-test runs it before each test)."""
    raise RuntimeError(_MESSAGE)

"""`tinyol reset`: put a device's learner back to the exported state (RESET)."""
from __future__ import annotations

import click

from ..checks import TIMEOUT
from ..link.device import Device
from ..options import emit_json, json_option, port_option, resolve_port


@click.command("reset")
@port_option()
@json_option
@click.option("--timeout", type=TIMEOUT, default=2.0, show_default=True, help="Seconds per attempt.")
def cmd(port, as_json, timeout):
    """Return the head to its exported weights and classes; clear the replay buffer, momentum,
    statistics and anomaly threshold; settings back to the exported ones. The flash store is
    left as it is (`tinyol load` brings a saved state back).

    \b
    Example:
      tinyol reset --port socket://127.0.0.1:4321
    """
    with Device(resolve_port(port), timeout=timeout) as dev:
        dev.reset()
        st = dev.stats()
    out = {"samples_seen": st.samples_seen, "n_active": st.n_active, "replay_fill": st.replay_fill,
           "replay_capacity": st.replay_capacity}
    if as_json:
        emit_json(out)
        return
    click.echo(f"reset: head back to its exported state ({st.n_active} rows active, replay buffer "
               f"{st.replay_fill}/{st.replay_capacity}, {st.samples_seen} samples learned)")

"""Which cluster a command that reads one talks to: ``--kubeconfig`` (or ``KUBECONFIG``), else the cluster of the
pod it runs in (its service account), else the local sandbox started by ``capstan sandbox up`` / ``capstan demo``,
else one line saying how to get one."""

from __future__ import annotations

from pathlib import Path

from capstan.errors import UserError


def cluster_kubeconfig(kubeconfig: Path | None, *, sandbox_dir: Path | None = None) -> Path | None:
    """``kubeconfig`` when given; None in a pod (``capstan.kube.connector(None)`` connects in-cluster);
    otherwise the running sandbox's (in ``sandbox_dir`` or the default one)."""
    if kubeconfig is not None:
        return kubeconfig
    from capstan.kube import in_a_pod

    if in_a_pod():
        return None
    from capstan.sandbox import Sandbox, default_state_dir

    box = Sandbox(sandbox_dir or default_state_dir("default"))
    state = box.load_state()
    if state is None or not box.is_up():
        raise UserError(
            "no cluster: give --kubeconfig (or set KUBECONFIG), or start the local one with `capstan sandbox up`"
        )
    return Path(state.kubeconfig)

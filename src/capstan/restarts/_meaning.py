"""What a container's last termination means, in plain words: exit code → signal, OOM kill vs node memory
pressure, probe kills, graceful stops. Pure lookups; the wording is what an on-call engineer reads first."""

from __future__ import annotations

from typing import Final

SIGNALS: Final = {
    1: "SIGHUP",
    2: "SIGINT",
    3: "SIGQUIT",
    4: "SIGILL",
    6: "SIGABRT",
    7: "SIGBUS",
    8: "SIGFPE",
    9: "SIGKILL",
    11: "SIGSEGV",
    13: "SIGPIPE",
    14: "SIGALRM",
    15: "SIGTERM",
}


def signal_of(exit_code: int | None, signal: int | None = None) -> str | None:
    """The signal that ended the process: the reported ``signal``, else exit codes 129–159 (128 + n)."""
    number = (
        signal if signal else (exit_code - 128 if exit_code is not None and 128 < exit_code < 160 else None)
    )
    if number is None:
        return None
    return f"{SIGNALS.get(number, 'signal')} ({number})"


def explain(
    reason: str | None,
    exit_code: int | None,
    signal: int | None = None,
    *,
    node_memory_pressure: bool = False,
    liveness_failed: bool = False,
    memory_limit: str | None = None,
) -> str:
    """One or two sentences saying why the container stopped."""
    sig = signal_of(exit_code, signal)
    if reason == "OOMKilled":
        limit = f" ({memory_limit})" if memory_limit else ""
        text = (
            f"Killed by the kernel OOM killer: the container used more memory than its limit{limit}"
            if memory_limit
            else "Killed by the kernel OOM killer (the container has no memory limit, so the node ran out of memory)"
        )
        if node_memory_pressure:
            text += "; the node also reports memory pressure"
        return text + "."
    if exit_code == 137 or (sig or "").startswith("SIGKILL"):
        if node_memory_pressure:
            return (
                "Killed with SIGKILL while the node was under memory pressure: most likely the node ran out of "
                "memory (kernel OOM kill or kubelet eviction), not the container's own limit."
            )
        if liveness_failed:
            return "Killed with SIGKILL by the kubelet after failed liveness probes (it did not stop on SIGTERM)."
        return (
            "Killed with SIGKILL (by the kubelet, the container runtime or the kernel); no OOM was reported."
        )
    if exit_code == 143 or (sig or "").startswith("SIGTERM"):
        if liveness_failed:
            return "Stopped with SIGTERM by the kubelet after failed liveness probes."
        return "Stopped with SIGTERM (a graceful stop: probe failure, eviction, preemption or a rollout)."
    if exit_code == 0:
        return "Exited successfully (code 0); it was restarted because the pod restarts containers that exit."
    if exit_code == 139 or (sig or "").startswith("SIGSEGV"):
        return "Crashed with a segmentation fault (SIGSEGV)."
    if exit_code == 134 or (sig or "").startswith("SIGABRT"):
        return "Aborted (SIGABRT), typically a failed assertion or an abort() in native code."
    if exit_code == 126:
        return "The command could not be executed (exit 126: permission denied or not executable)."
    if exit_code == 127:
        return "The command was not found (exit 127)."
    if reason in ("ContainerCannotRun", "StartError", "CreateContainerError"):
        return f"The container could not start ({reason})."
    if sig:
        return f"Ended by {sig}."
    if exit_code is not None:
        return f"The application exited with code {exit_code} ({reason or 'Error'})."
    return "The last termination state is not available."

"""The Ray executor: each configuration a Ray task on a cluster, streamed back as it finishes.

A task claims its resources from Ray (``cpus_per_run`` whole CPUs; one GPU more for a CUDA
run), pins them (:func:`~torchgauge.executors.cpu_cores.claim_cores`, ``CUDA_VISIBLE_DEVICES``)
and runs the configuration with :func:`torchgauge.runner.run_suite`, so a run on a cluster
node keeps the local runner's isolated worker, timeout, memory cap and statuses. The driver
waits on all tasks at once (``ray.wait``) and hands each record to ``on_result`` the moment
it returns.

A task that fails for a reason outside the model (its node died, its Ray worker crashed) is
submitted once more, to the nodes still alive; a second failure becomes an ``error`` record
giving both reasons. Records already returned are never re-run or lost.

Each record carries the environment of the node that ran it (``collect_env`` there, plus
``ray_node_id``), so its machine fingerprint and hostname travel with it. Unless
``mix_hardware`` is set, runs go only to the nodes of one machine fingerprint (the kind with
the most capacity for the run's device): one results file never mixes hardware silently.

Example:
    >>> executor = RayExecutor(RayOptions(address="head:6379"))  # doctest: +SKIP
    >>> records = executor.run(plan(request), RunnerOptions(timeout_s=600), on_result=save)
"""

from __future__ import annotations

import dataclasses
import functools
import socket
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..registry import model_domain
from ..results.schema import RunConfig, RunRecord
from ..runner import RunnerOptions, run_suite

__all__ = ["ATTEMPTS_PER_RUN", "ClusterError", "ClusterNode", "RayExecutor", "RayOptions", "choose_hardware"]

# A run whose task is lost (node died, Ray worker crashed) is tried this many times in all.
ATTEMPTS_PER_RUN = 2
# Seconds between the driver's checks for dead nodes while it waits for results.
WAIT_POLL_S = 1.0
# Seconds to wait for the cluster's address to answer (Ray itself retries for minutes).
CONNECT_TIMEOUT_S = 10.0
# Label Ray gives every node (used to keep runs on the chosen hardware and off dead nodes).
_NODE_ID_LABEL = "ray.io/node-id"


class ClusterError(RuntimeError):
    """The cluster cannot run the suite as asked (unreachable, no node with the resources)."""


@dataclass(frozen=True)
class RayOptions:
    """Where and how runs go on a Ray cluster."""

    address: str | None = None  # "host:port" or "ray://..."; None: $RAY_ADDRESS, else a new local cluster
    cpus_per_run: int = 1  # whole CPUs (pinned cores) each run holds, GPU runs included
    mix_hardware: bool = False  # True: use nodes of every machine fingerprint in one suite
    device: str = "cpu"  # the suite's device: "cuda" suites go to nodes with GPUs (Ray assigns one per run)

    def __post_init__(self) -> None:
        if self.cpus_per_run < 1:
            raise ValueError(f"cpus_per_run must be a whole number >= 1; got {self.cpus_per_run}")
        if self.device not in ("cpu", "cuda"):
            raise ValueError(f"device {self.device!r}: the ray executor assigns GPUs itself; accepted: cpu, cuda")


@dataclass
class ClusterNode:
    """A live node of the cluster and what it offers."""

    node_id: str
    hostname: str
    cpus: float
    gpus: float
    env: dict[str, Any] | None = None  # collect_env on the node (the probe)


@dataclass
class _Attempt:
    index: int
    config: RunConfig
    number: int  # 1-based
    earlier_failure: str | None = None


@functools.lru_cache(maxsize=1)
def _node_env(node_id: str) -> dict[str, Any]:
    """This node's environment, collected once per Ray worker process."""
    import ray

    from ..harness.env import collect_env

    env = collect_env()
    env["ray_node_id"] = node_id
    env["ray_node_ip"] = ray.util.get_node_ip_address()
    return env


def _probe_node() -> dict[str, Any]:
    import ray

    return _node_env(ray.get_runtime_context().get_node_id())


def _run_on_node(config: RunConfig, options: RunnerOptions, cpus: int) -> dict[str, Any]:
    """The Ray task: claim cores (and the GPU Ray assigned), run one config isolated, return its record."""
    import ray

    from .cpu_cores import CoresUnavailable, claim_cores

    env = _node_env(ray.get_runtime_context().get_node_id())
    gpu_ids = [str(g) for g in ray.get_gpu_ids()]
    try:
        with claim_cores(cpus, timeout_s=options.timeout_s) as cores:
            pinned = dataclasses.replace(
                options,
                jobs=1,
                threads_per_worker=cpus,
                cpu_affinity=cores,
                worker_env=options.worker_env + ((("CUDA_VISIBLE_DEVICES", ",".join(gpu_ids)),) if gpu_ids else ()),
            )
            [record] = run_suite([config], pinned)
    except CoresUnavailable as exc:
        record = RunRecord(config, "error", error=f"on {env['hostname']}: {exc}")
    record.env = dict(env)
    return record.to_dict()


def choose_hardware(
    nodes: Sequence[ClusterNode], *, gpu: bool, mix_hardware: bool
) -> tuple[list[ClusterNode], str | None]:
    """The nodes a suite may use, and a note when some were left out.

    Nodes are grouped by machine fingerprint; unless ``mix_hardware``, only the group with
    the most capacity for the run's device (GPUs for CUDA runs, else CPUs) is used.
    """
    groups: dict[str, list[ClusterNode]] = defaultdict(list)
    for node in nodes:
        groups[(node.env or {}).get("machine_fingerprint", "?")].append(node)
    if len(groups) <= 1 or mix_hardware:
        return list(nodes), None

    def capacity(fingerprint: str) -> float:
        return sum(n.gpus if gpu else n.cpus for n in groups[fingerprint])

    chosen = max(groups, key=capacity)
    others = "; ".join(
        f"{fp} ({', '.join(sorted({n.hostname for n in ns}))})" for fp, ns in groups.items() if fp != chosen
    )
    note = (
        f"the cluster holds {len(groups)} kinds of hardware; running on fingerprint {chosen} "
        f"({len(groups[chosen])} node(s)) and leaving out {others}; --mix-hardware uses all"
    )
    return groups[chosen], note


def _check_reachable(address: str) -> None:
    """Fail fast with one line when ``host:port`` (or ``ray://host:port``) does not answer."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit():
        return  # "auto", "local": Ray resolves those itself
    try:
        socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        raise ClusterError(
            f"cannot connect to the Ray cluster at {address}: {exc.strerror or exc}; "
            "accepted: the head's host:port (ray start --head prints it)"
        ) from None


def _needs_gpu(config: RunConfig) -> bool:
    return config.device.split(":")[0] == "cuda"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


class RayExecutor:
    """Runs a suite on a Ray cluster (see the module docstring).

    Args:
        options: cluster address, CPUs per run, whether hardware may mix.
        on_note: called with one-line notes (the hardware chosen, retries); default: silent.
    """

    def __init__(self, options: RayOptions = RayOptions(), *, on_note: Callable[[str], None] | None = None) -> None:
        self.options = options
        self.on_note = on_note or (lambda _: None)
        self._connected_here = False
        self._nodes: dict[str, ClusterNode] | None = None  # the nodes runs may use, by id

    # -- cluster ------------------------------------------------------------------------------

    def _connect(self) -> None:
        try:
            import ray
        except ImportError:
            raise ClusterError("the ray executor needs Ray: pip install 'torchgauge[ray]'") from None
        if ray.is_initialized():
            return
        if self.options.address:
            _check_reachable(self.options.address)
        try:
            ray.init(address=self.options.address, logging_level="ERROR", log_to_driver=False)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise ClusterError(
                f"cannot connect to the Ray cluster at {self.options.address or '$RAY_ADDRESS'}: {_first_line(exc)}"
            ) from None
        self._connected_here = True

    @staticmethod
    def _alive_nodes() -> dict[str, ClusterNode]:
        import ray

        nodes = {}
        for n in ray.nodes():
            if n.get("Alive"):
                res = n.get("Resources", {})
                nodes[n["NodeID"]] = ClusterNode(
                    n["NodeID"], n.get("NodeManagerHostname", "?"), res.get("CPU", 0.0), res.get("GPU", 0.0)
                )
        return nodes

    def _fits(self, node: ClusterNode, gpu: bool) -> bool:
        return node.cpus >= self.options.cpus_per_run and (node.gpus >= 1 or not gpu)

    def _choose_nodes(self, gpu: bool) -> dict[str, ClusterNode]:
        """The nodes runs may use: those with the resources, of one fingerprint unless mix_hardware."""
        import ray

        self._connect()
        usable = {i: n for i, n in self._alive_nodes().items() if self._fits(n, gpu)}
        if not usable:
            need = f"{self.options.cpus_per_run} CPU(s)" + (" and a GPU" if gpu else "")
            raise ClusterError(f"no node of the Ray cluster offers {need} per run")
        probes = {
            i: ray.remote(_probe_node).options(num_cpus=0, label_selector={_NODE_ID_LABEL: i}).remote() for i in usable
        }
        for node_id, ref in probes.items():
            usable[node_id].env = ray.get(ref)
        chosen, note = choose_hardware(list(usable.values()), gpu=gpu, mix_hardware=self.options.mix_hardware)
        if note:
            self.on_note(note)
        usable = {n.node_id: n for n in chosen}
        return usable

    def environment(self) -> dict[str, Any]:
        """The environment of the hardware the suite runs on: a node's, probed there, without
        its node id (each record names its own node)."""
        if self._nodes is None:
            self._nodes = self._choose_nodes(gpu=self.options.device == "cuda")
        env = next(iter(self._nodes.values())).env or {}
        return {k: v for k, v in env.items() if not k.startswith("ray_")}

    def close(self) -> None:
        if self._connected_here:
            import ray

            ray.shutdown()
            self._connected_here = False

    # -- running ------------------------------------------------------------------------------

    def run(
        self,
        configs: Sequence[RunConfig] | Iterable[RunConfig],
        options: RunnerOptions,
        *,
        on_result: Callable[[RunRecord], None] | None = None,
        on_start: Callable[[RunConfig], None] | None = None,
    ) -> list[RunRecord]:
        """Run every config on the cluster; records in config order (``on_result`` as each returns).

        ``on_start`` is called as each run is submitted (Ray decides when it starts).
        """
        import ray

        if not options.isolate:
            raise ClusterError("the ray executor always isolates runs; in-process runs are for local debugging")
        configs = list(configs)
        stray = sorted({c.device for c in configs} - {self.options.device})
        if stray:
            raise ClusterError(
                f"runs on {', '.join(stray)} in a suite for {self.options.device}; the ray executor "
                "assigns GPUs itself: give RayOptions(device=...) the suite's device, cpu or cuda"
            )
        if self._nodes is None:
            self._nodes = self._choose_nodes(gpu=self.options.device == "cuda")
        nodes = self._nodes
        task = ray.remote(_run_on_node)
        done: dict[int, RunRecord] = {}
        pending: dict[Any, _Attempt] = {}

        alive = list(nodes)

        def submit(attempt: _Attempt) -> None:
            if attempt.number > 1:  # a retry: only to the nodes still alive
                alive[:] = [i for i in self._alive_nodes() if i in nodes]
            if not alive:
                finish(
                    attempt,
                    RunRecord(
                        attempt.config,
                        "error",
                        error=(
                            f"lost on the Ray cluster: {attempt.earlier_failure}; "
                            "no node of the chosen hardware is left to retry on"
                        ),
                    ),
                )
                return
            ref = task.options(
                num_cpus=self.options.cpus_per_run,
                num_gpus=1 if _needs_gpu(attempt.config) else 0,
                max_retries=0,  # the retry below goes to the nodes still alive, and is counted
                label_selector={_NODE_ID_LABEL: f"in({','.join(alive)})"},
                name=f"torchgauge:{attempt.config.model}:{attempt.config.mode}",
            ).remote(attempt.config, options, self.options.cpus_per_run)
            pending[ref] = attempt

        def finish(attempt: _Attempt, record: RunRecord) -> None:
            if attempt.earlier_failure and record.env is not None:
                record.env = {
                    **record.env,
                    "ray_attempt": attempt.number,
                    "ray_earlier_failure": attempt.earlier_failure,
                }
            if not record.domain:
                record.domain = model_domain(record.config.model)  # a record made here, not on a node
            done[attempt.index] = record
            if on_result:
                on_result(record)

        def failed(attempt: _Attempt, exc: BaseException) -> None:
            reason = f"attempt {attempt.number}: {_first_line(exc)}"
            if attempt.earlier_failure:
                reason = f"{attempt.earlier_failure}; {reason}"
            if attempt.number < ATTEMPTS_PER_RUN:
                self.on_note(
                    f"{attempt.config.model} {attempt.config.mode}: {_first_line(exc)}; retrying on another node"
                )
                submit(_Attempt(attempt.index, attempt.config, attempt.number + 1, reason))
            else:
                finish(attempt, RunRecord(attempt.config, "error", error=f"lost on the Ray cluster: {reason}"))

        try:
            for index, config in enumerate(configs):
                if on_start:
                    on_start(config)
                submit(_Attempt(index, config, 1))
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=WAIT_POLL_S)
                if not ready and not any(i in nodes for i in self._alive_nodes()):
                    # Queued tasks would wait forever for a node of the chosen hardware.
                    for ref, attempt in list(pending.items()):
                        del pending[ref]
                        ray.cancel(ref, force=True)
                        finish(
                            attempt,
                            RunRecord(
                                attempt.config,
                                "error",
                                error=("every node of the chosen hardware left the Ray cluster before this run ended"),
                            ),
                        )
                for ref in ready:
                    attempt = pending.pop(ref)
                    try:
                        doc = ray.get(ref)
                    except ray.exceptions.RayError as exc:  # node died, worker crashed, task raised
                        failed(attempt, exc)
                        continue
                    finish(attempt, RunRecord.from_dict(doc))
        except BaseException:
            for ref in pending:
                ray.cancel(ref, force=True)
            raise
        return [done[i] for i in sorted(done)]

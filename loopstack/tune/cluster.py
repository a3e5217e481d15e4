"""Measuring candidates on a Ray cluster (the optional extra `loopstack[cluster]`).

    with connected("auto" | "HOST:PORT" | "ray://HOST:PORT"):
        with Fleet(inputs, reference, runs=10, timeout=20.0, per="node") as fleet:
            for kind in fleet.kinds:           # one per Target identity among the nodes
                kind.identity, kind.target, kind.peak_gflops, kind.nodes
                kind.pool.measure(trees, floor=...) -> [Measurement]   (WorkerPool's interface)

Every node runs one `Measurer` actor pinned to it (NodeAffinitySchedulingStrategy, soft=False)
holding all the CPUs the node gave Ray, or with per="core" one actor per CPU holding one each:
an actor with no CPU of its own would share its core with whatever Ray places there next. An
actor gets the program's inputs and reference output once, through the object store (its
constructor keeps them, so a restart has them again), and then only the serialised schedule
of each candidate: it compiles the candidate for its own CPU and times it there. It describes
itself once: its Target (as its own CPU and caches make it), the Target's identity and the FMA
peak measured on it. Nodes of the same identity form a kind; the tuner searches each kind for
itself and files the results under its identity. Measurements come back to the driver, which
alone writes the tuning database.

A candidate costs at most itself:

    crash    the actor died under it (Ray restarts it; max_task_retries=0: never run twice)
    timeout  no answer within `timeout` seconds: the actor is killed and restarted
    (lost)   the actor does not come back within `probe_s`: its node is taken as lost, the
             actor dropped, and the candidate measured again on another node

A crash and a dead node look alike at first (the task fails with RayActorError), so after a
failure or a timeout the actor is pinged: answered, it was the candidate; not answered, it was
the node. Each candidate has its own deadline and the pool waits with `ray.wait` on every task
in flight at once, so no candidate waits for a slow one, and a killed actor is never reused
while its last task still runs.
"""
from __future__ import annotations

import os
import socket
import time
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass, field

from ..errors import ArgumentError, ClusterError, UnsupportedError
from .measure import CRASH, ERROR, TIMEOUT, Measurement, measure_job, run_job, with_threads

PER = ("node", "core")
MAX_REQUEUES = 2        # a candidate whose node dies under it this often counts as a crash
DESCRIBE_S = 180.0      # for the first actor to start and describe itself
DESCRIBE_GRACE_S = 60.0  # then for the others


def _ray():
    try:
        import ray
    except ImportError:
        raise UnsupportedError("tuning on a cluster needs Ray: pip install 'loopstack[cluster]'") from None
    return ray


@contextmanager
def connected(address: str):
    """The driver connected to the Ray cluster at `address` ("auto": the one `ray start`
    started on this machine; "HOST:PORT" as `ray start --head` prints it; "ray://HOST:PORT":
    a Ray client). A connection made here is closed on exit; an existing one is used as is."""
    if not isinstance(address, str) or not address.strip():
        raise ArgumentError(f"cluster: expected 'auto', 'HOST:PORT' or 'ray://HOST:PORT', got {address!r}")
    ray = _ray()
    started = False
    if not ray.is_initialized():
        _check_reachable(address)
        try:
            ray.init(address=address, log_to_driver=False, logging_level="ERROR", namespace="loopstack")
        except (ConnectionError, ValueError, RuntimeError) as e:
            raise ClusterError(f"cannot connect to the Ray cluster at {address!r}: "
                               f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
        started = True
    try:
        yield ray
    finally:
        if started:
            ray.shutdown()


def _check_reachable(address: str, timeout: float = 5.0) -> None:
    """A HOST:PORT (or ray://HOST:PORT) nothing answers at fails now: Ray itself would retry
    for minutes. "auto" is Ray's to resolve."""
    if address == "auto":
        return
    hostport = address.split("://", 1)[-1]
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise ArgumentError(f"cluster: expected 'auto', 'HOST:PORT' or 'ray://HOST:PORT', got {address!r}")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as e:
        raise ClusterError(f"no Ray cluster answers at {address!r} ({e.strerror or e}); start one with "
                           "`ray start --head` and pass the address it prints") from None


class Measurer:
    """The actor that measures on one node (or core): compiles, checks and times candidates."""

    def __init__(self, inputs, reference, runs: int, target, job, label: str):
        import faulthandler

        faulthandler.disable()     # a crashing candidate is an expected, reported result
        self.inputs, self.reference, self.runs, self.target, self.job = list(inputs), reference, runs, target, job
        self.label = label

    def describe(self, peak_seconds: float = 0.1) -> dict:
        from ..isa.target import get_target, measure_peak

        tgt = get_target(self.target)
        return {"identity": tgt.identity, "target": tgt, "host": socket.gethostname(), "label": self.label,
                "peak_gflops": measure_peak(tgt, peak_seconds), "cores": os.cpu_count() or 1}

    def peak(self, seconds: float = 0.05) -> float:
        from ..isa.target import get_target, measure_peak

        return measure_peak(get_target(self.target), seconds)

    def measure(self, text: str, floor: float) -> Measurement:
        res = run_job(self.job, text, self.inputs, self.reference, self.runs, self.target, floor)
        res.node = self.label
        return res

    def ping(self) -> bool:
        return True


def _actor_lost(ray) -> tuple:
    """The errors of a task whose actor went away under it (its process or its node)."""
    x = ray.exceptions
    return (x.RayActorError, x.WorkerCrashedError, x.NodeDiedError, x.LocalRayletDiedError,
            x.ActorUnschedulableError)


def _actor_class(ray):
    """Measurer as a Ray actor class. Its measurements never retry (a retried crash crashes
    again, and a retried measurement is measured twice); the ping that follows a failure
    waits out the actor's restart (a task sent to a restarting actor otherwise fails at once)."""
    class PingedMeasurer(Measurer):
        @ray.method(max_task_retries=-1)
        def ping(self) -> bool:
            return True

    return ray.remote(PingedMeasurer)


@dataclass
class _Slot:
    actor: object
    label: str
    node_id: str
    lost: bool = False
    ref: object = None          # the task in flight
    probe: bool = False         # ... is a ping after a failure, deciding `verdict`
    index: int = -1             # the candidate it measures (or that failed on it)
    deadline: float = 0.0
    verdict: Measurement | None = None


class ClusterPool:
    """Candidates measured by a kind's actors; `measure(trees)` as WorkerPool.measure.

    `stats` counts what happened: measured, crashed, timed out, requeued (moved off a lost
    node), lost (actors whose node was lost)."""

    def __init__(self, slots: list, timeout: float, probe_s: float):
        self.slots, self.timeout, self.probe_s = slots, timeout, probe_s
        self.workers = len(slots)
        self.stats = {"measured": 0, "crash": 0, "timeout": 0, "requeued": 0, "lost": 0}

    def live(self) -> list:
        return [s for s in self.slots if not s.lost]

    def measure(self, trees, texts=None, floor: float = 0.0) -> list[Measurement]:
        from ..frontend.serialize import serialize

        ray = _ray()
        if not self.live():
            raise ClusterError("every node of the cluster was lost: nothing left to measure on")
        texts = list(texts) if texts is not None else [serialize(t) for t in trees]
        results: list[Measurement | None] = [None] * len(texts)
        queue = deque(range(len(texts)))
        requeues = [0] * len(texts)
        while queue or any(s.ref is not None for s in self.slots):
            for s in self.live():
                if queue and s.ref is None:
                    s.index = queue.popleft()
                    s.ref, s.probe = s.actor.measure.remote(texts[s.index], floor), False
                    s.deadline = time.monotonic() + self.timeout
            busy = [s for s in self.slots if s.ref is not None]
            if not busy:           # every node lost: what finished is returned (and recorded)
                for i in queue:
                    results[i] = Measurement(0.0, ERROR, 0.0, "not measured: every node of the cluster was lost")
                break
            wait = max(0.0, min(s.deadline for s in busy) - time.monotonic())
            ready, _ = ray.wait([s.ref for s in busy], num_returns=1, timeout=wait)
            ready = set(ready)
            now = time.monotonic()
            for s in busy:
                if s.ref in ready:
                    self._finished(ray, s, results, queue, requeues)
                elif now >= s.deadline:
                    self._overdue(ray, s, results, queue, requeues)
        return results

    def _finished(self, ray, s: _Slot, results, queue, requeues) -> None:
        ref, s.ref = s.ref, None
        try:
            value = ray.get(ref)
        except ray.exceptions.RayError as e:
            if s.probe:            # the actor did not come back (unschedulable: its node is gone)
                return self._lose(s, queue, requeues, results)
            if not isinstance(e, _actor_lost(ray)):
                value = Measurement(0.0, ERROR, 0.0, f"{type(e).__name__}: {e}".splitlines()[0][:300], s.label)
            else:                  # the candidate crashed the actor, or the node died: ask
                self._ping(s, Measurement(0.0, CRASH, 0.0, f"the measuring actor on {s.label} died", s.label))
                return
        if s.probe:                # the actor answered after the failure: the candidate caused it
            value = s.verdict
            self.stats[value.status] += 1
        else:
            self.stats["measured"] += 1
        results[s.index] = value
        s.verdict = None

    def _overdue(self, ray, s: _Slot, results, queue, requeues) -> None:
        if s.probe:                # no answer after a restart: the node is gone
            return self._lose(s, queue, requeues, results)
        try:
            ray.kill(s.actor, no_restart=False)  # a timed-out actor is dirty: restart it
        except ray.exceptions.RayError:
            pass                                 # gone already: the ping below tells
        s.ref = None
        self._ping(s, Measurement(0.0, TIMEOUT, 0.0, f"no result after {self.timeout:g} s", s.label))

    def _ping(self, s: _Slot, verdict: Measurement) -> None:
        s.verdict, s.probe = verdict, True
        s.ref = s.actor.ping.remote()
        s.deadline = time.monotonic() + self.probe_s

    def _lose(self, s: _Slot, queue, requeues, results) -> None:
        ray = _ray()
        s.lost, s.ref, s.probe = True, None, False
        self.stats["lost"] += 1
        try:
            ray.kill(s.actor, no_restart=True)
        except Exception:  # noqa: BLE001 - the actor may be unknown by now; it is dropped either way
            pass
        i = s.index
        if requeues[i] < MAX_REQUEUES:
            requeues[i] += 1
            self.stats["requeued"] += 1
            queue.appendleft(i)    # measured next, elsewhere
        else:
            results[i] = Measurement(0.0, CRASH, 0.0, f"lost with {MAX_REQUEUES + 1} nodes", s.label)
        s.verdict = None

    def peak(self) -> float:
        """The FMA peak measured now by one of the kind's actors (0.0 when none answers)."""
        ray = _ray()
        for s in self.live():
            if s.ref is None:
                try:
                    return float(ray.get(s.actor.peak.remote(), timeout=self.probe_s))
                except (ray.exceptions.RayError, TimeoutError):
                    continue
        return 0.0


@dataclass
class Kind:
    """Nodes of one Target identity: the searches tune each kind for itself."""
    identity: str
    target: object            # the Target as the kind's nodes see themselves
    peak_gflops: float
    nodes: list = field(default_factory=list)
    pool: object = None       # a ClusterPool of the kind's actors


def group_kinds(described, make_pool) -> list:
    """Kinds from [(slot, its describe() dict)]: slots of one Target identity together, the
    kind's peak the best its nodes measured, `make_pool(slots)` its pool; the largest kind
    first (a tune's one result is the kind most of the cluster is)."""
    kinds: dict[str, Kind] = {}
    members: dict[str, list] = {}
    for slot, d in described:
        kind = kinds.setdefault(d["identity"], Kind(d["identity"], d["target"], d["peak_gflops"]))
        kind.nodes.append(d["label"])
        kind.peak_gflops = max(kind.peak_gflops, d["peak_gflops"])
        members.setdefault(d["identity"], []).append(slot)
    for identity, kind in kinds.items():
        kind.pool = make_pool(members[identity])
    return sorted(kinds.values(), key=lambda k: -len(k.nodes))


class Fleet:
    """The measuring actors of every node with CPUs, grouped into kinds (see the module doc).

    `per`: "node" (one actor holding all of a node's CPUs; a parallel candidate uses them all)
    or "core" (one single-threaded actor per CPU: more candidates at once, each on one core;
    actors whose CPU other work holds are left out).
    `target`: a target name every node compiles for (None: each node's widest).
    `threads`: of a candidate's parallel loop (None: the CPUs its actor holds)."""

    def __init__(self, inputs, reference, runs: int = 10, timeout: float = 20.0, per: str = "node",
                 target=None, job=measure_job, probe_s: float = 30.0, threads: int | None = None):
        if per not in PER:
            raise ArgumentError(f"unknown per {per!r}; known: {', '.join(PER)}")
        ray = _ray()
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        self.actors = []
        target_name = target if target is None or isinstance(target, str) else target.name
        inputs_ref = ray.put(list(inputs))
        reference_ref = ray.put(reference)
        self._refs = (inputs_ref, reference_ref)       # kept alive for actor restarts
        cls = _actor_class(ray)
        slots = []
        for node in ray.nodes():
            cpus = int(node.get("Resources", {}).get("CPU", 0))
            if not node.get("Alive") or cpus < 1:
                continue
            node_id = node["NodeID"]
            host = node.get("NodeManagerHostname") or node.get("NodeManagerAddress", "?")
            actors, per_actor = (1, cpus) if per == "node" else (cpus, 1)
            node_job = with_threads(job, threads or per_actor)
            for k in range(actors):
                label = f"{host}:{node_id[:8]}" + (f"/{k}" if per == "core" else "")
                actor = cls.options(
                    num_cpus=per_actor, max_restarts=-1, max_task_retries=0,
                    scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
                ).remote(inputs_ref, reference_ref, runs, target_name, node_job, label)
                self.actors.append(actor)
                slots.append(_Slot(actor, label, node_id))
        if not slots:
            raise ClusterError("the cluster has no live node with a CPU to measure on")
        pending = {s.actor.describe.remote(): s for s in slots}
        # the first actor may take a while (a fresh worker imports numpy); once one has started,
        # the others get DESCRIBE_GRACE_S more: an actor still waiting then has found no free
        # CPU on its node (with per="core", CPUs other work holds)
        ready, rest = ray.wait(list(pending), num_returns=1, timeout=DESCRIBE_S)
        if ready and rest:
            more, _ = ray.wait(rest, num_returns=len(rest), timeout=DESCRIBE_GRACE_S)
            ready += more
        described = []
        for ref in ready:
            try:
                described.append((pending[ref], ray.get(ref)))
            except ray.exceptions.RayError:
                pass               # an actor that cannot start measures nothing
        kept = {id(s) for s, _ in described}
        for s in slots:
            if id(s) not in kept:
                ray.kill(s.actor, no_restart=True)
        if not described:
            raise ClusterError(f"no measuring actor started on the cluster within {DESCRIBE_S:g} s "
                               f"({len(slots)} requested)")
        self.kinds = group_kinds(described, lambda members: ClusterPool(members, timeout, probe_s))

    def close(self) -> None:
        ray = _ray()
        for a in self.actors:
            try:
                ray.kill(a, no_restart=True)
            except Exception:  # noqa: BLE001 - closing what may already be gone
                pass
        self.actors = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

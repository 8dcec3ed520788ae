"""The processes of one training or data run: which one this is, how many there are, and the few
collectives the runs need.

One process is the default and needs nothing. Launched as several (``accelerate launch
--num_processes N`` or ``torchrun --nproc-per-node N``), :meth:`Processes.current` lets accelerate's
``PartialState`` join the process group (NCCL on GPUs, gloo on CPUs) and each run splits its work by
:meth:`Processes.share`. Process 0 is the main one: it alone writes checkpoints, corpora, caches and
logs, so no file ever has two writers.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import os
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Sequence, TypeVar

import torch

T = TypeVar("T")
R = TypeVar("R")

LAUNCH_VARIABLES = ("WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE")


def launched_processes() -> int:
    """How many processes the launcher started (1 when this one was started alone)."""
    for name in LAUNCH_VARIABLES:
        value = os.environ.get(name)
        if value and value.isdigit():
            return int(value)
    return 1


@dataclass(frozen=True)
class Processes:
    """This process's ``rank`` among ``count``; one process (the default) makes every collective a no-op."""

    rank: int = 0
    count: int = 1
    device: torch.device | None = None  # the device the launcher gave this process (None: alone, choose)

    @classmethod
    def current(cls) -> "Processes":
        """The processes of this launch: joins the process group when there are several."""
        if launched_processes() < 2:
            return cls()
        from ..extras import require

        accelerate = require("accelerate", "train", "running with several processes")
        # without a GPU accelerate joins the processes only when told to use the CPU (gloo)
        state = accelerate.PartialState(cpu=not torch.cuda.is_available())
        if state.num_processes != launched_processes():
            raise RuntimeError(f"{launched_processes()} processes were launched but accelerate joined "
                               f"{state.num_processes}; launch with `accelerate launch` or `torchrun`.")
        return cls(state.process_index, state.num_processes, state.device)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def several(self) -> bool:
        return self.count > 1

    def share(self, items: Sequence[T]) -> list[T]:
        """This process's part of ``items``: every ``count``-th from its rank, so the parts together
        hold every item once and differ in size by at most one."""
        return list(items[self.rank::self.count])

    def sum(self, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor`` summed over the processes (in place; returned for chaining)."""
        if self.several:
            self._all_reduce(tensor, torch.distributed.ReduceOp.SUM)
        return tensor

    def max(self, value: float) -> float:
        """The largest ``value`` any process holds (e.g. elapsed time, so every process stops together)."""
        if not self.several:
            return value
        held = torch.tensor([value], dtype=torch.float64)
        self._all_reduce(held, torch.distributed.ReduceOp.MAX)
        return float(held)

    def _all_reduce(self, tensor: torch.Tensor, op) -> None:
        """All-reduce ``tensor`` in place; NCCL reduces tensors on this process's GPU only, so a host
        tensor makes the trip there and back."""
        if torch.distributed.get_backend() == "nccl" and tensor.device != self.device:
            moved = tensor.to(self.device)
            torch.distributed.all_reduce(moved, op=op)
            tensor.copy_(moved)
        else:
            torch.distributed.all_reduce(tensor, op=op)

    def copy_from_main(self, tensors: Sequence[torch.Tensor]) -> None:
        """Overwrite ``tensors`` (e.g. a model's parameters) with the main process's values, in place."""
        if self.several:
            for tensor in tensors:
                torch.distributed.broadcast(tensor, src=0)

    def from_main(self, obj: Any) -> Any:
        """The main process's ``obj``, on every process (a picklable object)."""
        if not self.several:
            return obj
        box = [obj]
        torch.distributed.broadcast_object_list(box, src=0)
        return box[0]

    def gather(self, obj: Any) -> list[Any]:
        """Every process's ``obj`` (picklable), in rank order, on the main process ([] on the others)."""
        if not self.several:
            return [obj]
        out: list[Any] | None = [None] * self.count if self.is_main else None
        torch.distributed.gather_object(obj, out, dst=0)
        return out if self.is_main else []

    def wait(self) -> None:
        """Every process waits here until all have arrived."""
        if self.several:
            torch.distributed.barrier()

    def close(self) -> None:
        """Leave the process group once every process is done (a process that exits inside it can abort
        at shutdown); commands call it when they end."""
        if self.several and torch.distributed.is_initialized():
            # what the run left unreferenced (a sharded model's process mesh among it) goes first, while
            # its group is still there to release it
            gc.collect()
            torch.distributed.barrier()
            torch.distributed.destroy_process_group()

    @contextlib.contextmanager
    def main_first(self):
        """The main process runs the block first (e.g. writes a cache); the others run it after, and find
        its work done."""
        if not self.is_main:
            self.wait()
        try:
            yield
        finally:
            if self.is_main:
                self.wait()


class Rounds:
    """Batches worked in rounds of one batch per process, so N processes produce what one would, in
    the same order: each round every process works its batch and the main process (the one writer)
    receives the round's results in batch order to store them.

    Before each round the main process's ``decide()`` (None: no limit; the others pass None) gives how
    many batches may start (0: none) and why not, so every process stops at the same round;
    :attr:`stop_reason` keeps that reason (None when the batches ran out). ``idle``: what a process
    without a batch in a round runs instead (a target sharded over the processes needs every process
    in each forward)."""

    def __init__(self, processes: Processes, decide: Callable[[], tuple[int, str | None]] | None,
                 idle: Callable[[], Any] | None = None):
        self.processes, self.decide, self.idle = processes, decide, idle
        self.stop_reason: str | None = None

    def over(self, batches: Iterable[T], work: Callable[[T], R]) -> Iterator[list[tuple[T, R]]]:
        """Each round's ``(batch, work(batch))`` pairs (on the main process; [] on the others), until
        ``batches`` (every process's the same, and in the same order) run out or ``decide`` stops."""
        processes = self.processes
        pending, waiting = iter(batches), []
        while self.stop_reason is None:
            waiting += itertools.islice(pending, processes.count - len(waiting))
            if not waiting:
                return
            limit = self.decide() if self.decide is not None else (len(waiting), None)
            allowed, reason = processes.from_main(limit if processes.is_main else None)
            size = min(allowed, len(waiting))
            if size <= 0:
                self.stop_reason = reason or "stopped"
                return
            batch, waiting = waiting[:size], waiting[size:]
            mine = None
            if processes.rank < size:
                mine = work(batch[processes.rank])
            elif self.idle is not None:
                self.idle()
            yield list(zip(batch, processes.gather(mine)))

"""PyTorch Lightning inside a worker: the worker's ranks are the ``Trainer``'s DDP world.

:func:`lightning_loss_fn` turns a factory of ``LightningModule`` s and a ``Trainer`` configuration into a
generator loss function for :class:`propulate.Islands` (any ``ranks_per_worker``, 1 included). For each
individual, on every rank of its worker, it

- takes the worker's ``torch.distributed`` process group
  (:func:`~propulate.utils.distributed.init_worker_process_group`: NCCL with CUDA, gloo otherwise, created
  once per worker and reused) and hands it to the ``Trainer`` through :class:`WorkerEnvironment`, a Lightning
  ``ClusterEnvironment`` that takes world size, ranks and rendezvous from the worker, not from SLURM, the
  launcher's variables or ``COMM_WORLD``. Lightning's DDP strategy finds the group initialized and uses it;
  its teardown leaves it alone, so the next individual reuses it;
- trains with ``trainer.fit`` in a helper thread (:mod:`propulate.integrations.bridge`); after each validation
  :class:`PropulateCallback` saves Lightning's own checkpoint into the individual's evaluation folder
  (:func:`propulate.evaluation_checkpoint`) and reports the monitored metric as an interim loss, which commits
  the checkpoint and lets the surrogate prune, on every rank at the same validation;
- continues an interrupted evaluation, in a later job, with ``trainer.fit(..., ckpt_path=...)`` from the
  checkpoint committed last: no epoch is trained twice;
- returns the metric of the last validation as the loss.

Each rank is shown to Lightning as a node of its own with one device (``num_nodes`` = the worker's ranks,
``devices`` = that rank's GPU, or one CPU process): this rank's GPU is the one the worker group placed it on.

Lightning is imported with this module; ``import propulate`` never imports it.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from mpi4py import MPI

from ..checkpoint.evaluations import evaluation_checkpoint
from ..utils.distributed import METHODS, WorkerGroup, abort_worker_process_group
from .bridge import Reporter, follow_trainer, worker_group

try:
    import lightning.pytorch as pl
    import torch
    from lightning.fabric.plugins.environments import ClusterEnvironment
    from lightning.pytorch.strategies import DDPStrategy, SingleDeviceStrategy
except ImportError as err:  # pragma: no cover - depends on the installation
    raise ImportError(
        "propulate.integrations.lightning needs PyTorch Lightning: "
        f'pip install "propulate[lightning]" ({err})'
    ) from err

__all__ = ["CHECKPOINT_FILE", "RESERVED", "PropulateCallback", "WorkerEnvironment", "lightning_loss_fn"]

#: The name of Lightning's checkpoint file in an evaluation's folder.
CHECKPOINT_FILE = "lightning.ckpt"
#: ``Trainer`` arguments set by :func:`lightning_loss_fn` from the worker, refused in ``trainer_kwargs``.
RESERVED = ("accelerator", "devices", "num_nodes", "strategy", "plugins")
#: ``Trainer`` arguments whose default :func:`lightning_loss_fn` changes (a ``trainer_kwargs`` entry wins):
#: no logs, checkpoints or progress bars of Lightning's own in the working directory of every rank of every
#: worker; the evaluation folder holds the checkpoint that counts.
DEFAULTS: Mapping[str, Any] = {
    "logger": False,
    "enable_checkpointing": False,
    "enable_progress_bar": False,
    "enable_model_summary": False,
}
MODES = ("min", "max")


class WorkerEnvironment(ClusterEnvironment):
    """A Lightning ``ClusterEnvironment`` of one propulate worker: its ranks are the ``Trainer``'s world.

    World size, global rank and the rendezvous (``main_address``, ``main_port``) are those of the worker's
    process group; the processes exist already (started by ``mpiexec`` or ``srun``). Each rank is a node of
    its own (``node_rank`` = its rank in the worker, ``local_rank`` = 0), matching a ``Trainer`` with
    ``num_nodes`` = the worker's ranks and one device per node, as :func:`lightning_loss_fn` builds it.

    Parameters
    ----------
    group : WorkerGroup
        The worker's process group (:func:`~propulate.utils.distributed.init_worker_process_group`).
    """

    def __init__(self, group: WorkerGroup) -> None:
        super().__init__()
        self.group = group

    @property
    def creates_processes_externally(self) -> bool:
        """Always ``True``: the MPI launcher started every rank."""
        return True

    @property
    def main_address(self) -> str:
        """The host of the worker's rendezvous (its first rank)."""
        return self.group.master_addr

    @property
    def main_port(self) -> int:
        """The TCP port of the worker's rendezvous."""
        return self.group.master_port

    @staticmethod
    def detect() -> bool:
        """Never detected from the environment: only :func:`lightning_loss_fn` uses it."""
        return False

    def world_size(self) -> int:
        """Return the number of ranks of the worker."""
        return self.group.world_size

    def set_world_size(self, size: int) -> None:
        """Check the size Lightning derived from the ``Trainer``'s ``num_nodes`` and devices."""
        _same("world size", size, self.group.world_size)

    def global_rank(self) -> int:
        """Return this rank's index in the worker."""
        return self.group.rank

    def set_global_rank(self, rank: int) -> None:
        """Check the rank Lightning derived from node rank and local rank."""
        _same("global rank", rank, self.group.rank)

    def local_rank(self) -> int:
        """Return 0: each rank is a node with one device."""
        return 0

    def node_rank(self) -> int:
        """Return this rank's index in the worker (each rank is a node)."""
        return self.group.rank


def _same(what: str, lightning: int, worker: int) -> None:
    if lightning != worker:
        raise RuntimeError(
            f"Lightning derived {what} {lightning} but the worker's is {worker}: the Trainer must be built "
            "with num_nodes = the worker's ranks and one device (lightning_loss_fn does so)"
        )


class PropulateCallback(pl.Callback):
    """Reports the monitored metric after each validation to propulate, and saves what resumes the training.

    After each validation (not Lightning's sanity check), on every rank: saves the ``Trainer``'s checkpoint to
    ``save_to`` (``trainer.save_checkpoint``: the first rank writes, every rank waits for it), then hands the
    metric to propulate and waits for its verdict. A training propulate ended (pruned, stopped, failed
    elsewhere) stops there (``trainer.should_stop``), at the latest before its next batch.

    Parameters
    ----------
    reporter : Reporter
        The trainer thread's end of :func:`~propulate.integrations.bridge.follow_trainer`.
    monitor : str
        The metric logged during validation (``self.log(monitor, ...)``) that is minimized.
    mode : {"min", "max"}
        ``"max"``: the metric is maximized (an accuracy), its negative is the loss.
    save_to : pathlib.Path
        The checkpoint file, in the evaluation folder's ``path``.
    """

    def __init__(self, reporter: Reporter, monitor: str, mode: str, save_to: Path) -> None:
        self.reporter = reporter
        self.monitor = monitor
        self.sign = 1.0 if mode == "min" else -1.0
        self.save_to = save_to
        #: Validations reported in this attempt.
        self.reported = 0

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any) -> None:
        """End the training before the batch if propulate ended it (raises ``Halted``)."""
        self.reporter.check()

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Save the checkpoint and report the monitored metric; stop the training if propulate says so."""
        if trainer.sanity_checking:
            return
        interim = self.interim(trainer)
        trainer.save_checkpoint(self.save_to)
        self.reported += 1
        if not self.reporter.report(interim):
            trainer.should_stop = True

    def interim(self, trainer: pl.Trainer) -> dict[str, float]:
        """Return the interim loss (``"loss"``) with every other scalar metric logged, and the epoch.

        Raises
        ------
        KeyError
            If the monitored metric was not logged, naming those that were.
        """
        metrics = {}
        for name, value in trainer.callback_metrics.items():
            if isinstance(value, torch.Tensor) and value.numel() == 1:
                metrics[name] = float(value.item())
            elif isinstance(value, (int, float)):
                metrics[name] = float(value)
        if self.monitor not in metrics:
            raise KeyError(
                f"monitor={self.monitor!r}: no such scalar was logged during validation; logged: "
                f"{sorted(metrics) or 'nothing'} (self.log({self.monitor!r}, ...) in validation_step)"
            )
        loss = self.sign * metrics[self.monitor]
        metrics.pop("loss", None)
        return {"loss": loss, **metrics, "epoch": trainer.current_epoch}


def lightning_loss_fn(
    module_factory: Callable[[Mapping[str, Any]], pl.LightningModule],
    *,
    datamodule: pl.LightningDataModule | Callable[[Mapping[str, Any]], pl.LightningDataModule] | None = None,
    monitor: str = "val_loss",
    mode: str = "min",
    trainer_kwargs: Mapping[str, Any] | Callable[[Mapping[str, Any]], Mapping[str, Any]] | None = None,
    ddp_kwargs: Mapping[str, Any] | None = None,
    method: str = "auto",
    timeout: datetime.timedelta = datetime.timedelta(minutes=10),
) -> Callable[..., Iterator[dict[str, float]]]:
    """Return a loss function that trains a ``LightningModule`` with a Lightning ``Trainer`` on the worker.

    The loss function, ``loss_fn(params, comm=MPI.COMM_SELF)``, is a generator: it yields the monitored metric
    after each validation (an interim loss, for the surrogates; it commits the checkpoint saved for it), and
    the last one is the individual's loss. The other scalars logged during validation travel along as
    metrics, with the ``epoch``. Pass it to :class:`propulate.Islands` with any ``ranks_per_worker``.

    Parameters
    ----------
    module_factory : callable (params) -> lightning.pytorch.LightningModule
        Builds the model of an individual from its parameters (a mapping, the :class:`propulate.Individual`),
        on every rank of the worker; the module defines ``training_step``, ``validation_step`` (which logs
        ``monitor``), ``configure_optimizers`` and, without ``datamodule``, its data loaders.
    datamodule : LightningDataModule or callable (params) -> LightningDataModule, optional
        The data, the same for every individual or built from its parameters (a batch size, say).
    monitor : str
        The metric that is the loss, logged in ``validation_step`` (``self.log(monitor, value,
        sync_dist=True)`` averages it over the worker's ranks; only the first rank's value counts).
    mode : {"min", "max"}
        Whether the metric is minimized (a loss) or maximized (an accuracy: the loss is its negative).
    trainer_kwargs : mapping or callable (params) -> mapping, optional
        Arguments of ``lightning.pytorch.Trainer`` (``max_epochs``, ``val_check_interval``, ``precision``,
        ``callbacks``, ...), or a function that returns them for an individual. Not ``accelerator``,
        ``devices``, ``num_nodes``, ``strategy`` or ``plugins``: the worker decides those. Unless given here,
        Lightning's logger, its checkpointing, progress bar and model summary are off (:data:`DEFAULTS`).
    ddp_kwargs : mapping, optional
        Further arguments of Lightning's ``DDPStrategy`` (``find_unused_parameters``, ``static_graph``, ...)
        for workers of several ranks.
    method : str
        How the worker's process group is made: ``"auto"`` (NCCL with CUDA, else gloo), ``"gloo"``,
        ``"nccl-slurm"`` or ``"nccl-openmpi"`` (see :mod:`propulate.utils.distributed`).
    timeout : datetime.timedelta
        How long the group's rendezvous and collective operations may wait.

    Returns
    -------
    callable
        The generator loss function.

    Raises
    ------
    TypeError
        If ``module_factory`` is not callable or ``trainer_kwargs`` is neither a mapping nor a callable; in
        the loss function, if the factory returns no ``LightningModule``.
    ValueError
        If ``mode`` or ``method`` is not one of the allowed values, or ``trainer_kwargs`` holds an argument
        the worker sets (naming it); in the loss function, if the training ended without a validation.
    KeyError
        In the loss function, on every rank, if ``monitor`` was not logged during validation.
    ImportError
        When this module is imported without PyTorch Lightning.

    Examples
    --------
    ::

        loss_fn = lightning_loss_fn(
            lambda params: Classifier(lr=params["lr"], hidden=params["hidden"]),
            datamodule=MNISTData(batch_size=64),
            trainer_kwargs={"max_epochs": 8},
        )
        surrogate = lambda: SuccessiveHalving(min_resource=1, reduction_factor=2, max_resource=8)
        Islands(loss_fn, propagator, rng, ranks_per_worker=2, surrogate_factory=surrogate).propulate()
    """
    if not callable(module_factory):
        raise TypeError(f"module_factory must be callable; got {type(module_factory).__name__}")
    if mode not in MODES:
        raise ValueError(f"mode must be 'min' or 'max'; got {mode!r}")
    if not isinstance(monitor, str) or not monitor:
        raise ValueError(f"monitor must be the name of a logged metric; got {monitor!r}")
    if trainer_kwargs is not None and not callable(trainer_kwargs):
        _check_trainer_kwargs(trainer_kwargs)
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(repr(m) for m in METHODS)}; got {method!r}")

    def loss_fn(params: Mapping[str, Any], comm: MPI.Comm = MPI.COMM_SELF) -> Iterator[dict[str, float]]:
        group = worker_group(comm, method, timeout)
        module = module_factory(params)
        if not isinstance(module, pl.LightningModule):
            raise TypeError(
                f"module_factory returned {type(module).__name__}, not a lightning.pytorch.LightningModule"
            )
        data = datamodule(params) if callable(datamodule) else datamodule
        kwargs = dict(trainer_kwargs(params) if callable(trainer_kwargs) else trainer_kwargs or {})
        _check_trainer_kwargs(kwargs)
        checkpoint = evaluation_checkpoint()
        latest = checkpoint.latest
        resume_from = None if latest is None else str(latest / CHECKPOINT_FILE)
        trainer_args = {**DEFAULTS, **kwargs, **_placement(group, ddp_kwargs or {})}

        def train(reporter: Reporter) -> None:
            callback = PropulateCallback(reporter, monitor, mode, checkpoint.path / CHECKPOINT_FILE)
            callbacks = [*_as_list(trainer_args.pop("callbacks", None)), callback]
            trainer = pl.Trainer(**trainer_args, callbacks=callbacks)
            trainer.fit(module, datamodule=data, ckpt_path=resume_from)
            if callback.reported == 0 and latest is None:
                raise ValueError(
                    "the Trainer ended without a validation: nothing to report as the loss (give the module "
                    "a validation_step and validation data, and let limit_val_batches and "
                    "check_val_every_n_epoch allow a validation)"
                )

        abandon = abort_worker_process_group if group.world_size > 1 else _nothing
        yield from follow_trainer(train, abandon, name=f"propulate-lightning-{MPI.COMM_WORLD.rank}")

    return loss_fn


def _check_trainer_kwargs(kwargs: Mapping[str, Any]) -> None:
    if not isinstance(kwargs, Mapping):
        raise TypeError(f"trainer_kwargs must be a mapping or a callable; got {type(kwargs).__name__}")
    reserved = sorted(set(kwargs) & set(RESERVED))
    if reserved:
        raise ValueError(
            f"trainer_kwargs: {', '.join(reserved)} cannot be given: the worker's ranks and devices decide "
            "them (the Trainer's world is the worker's process group)"
        )


def _placement(group: WorkerGroup, ddp_kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """Return the ``Trainer`` arguments that put it on the worker's ranks and this rank's device."""
    device = torch.device(group.device)
    devices: int | list[int]
    if device.type == "cuda":
        accelerator, devices = "cuda", [device.index if device.index is not None else 0]
    else:
        accelerator, devices = "cpu", 1
    strategy: Any
    if group.world_size > 1:
        strategy = DDPStrategy(
            cluster_environment=WorkerEnvironment(group),
            process_group_backend=group.backend,
            **ddp_kwargs,
        )
    else:
        strategy = SingleDeviceStrategy(device=device)
    return {
        "accelerator": accelerator,
        "devices": devices,
        "num_nodes": group.world_size,
        "strategy": strategy,
    }


def _as_list(callbacks: Any) -> list[Any]:
    if callbacks is None:
        return []
    return list(callbacks) if isinstance(callbacks, (list, tuple)) else [callbacks]


def _nothing() -> None:
    return None

"""Hugging Face's ``Trainer`` inside a worker: the worker's ranks are the ``Trainer``'s DDP world.

:func:`hf_trainer_loss_fn` turns a model factory, the data and ``TrainingArguments`` into a generator loss
function for :class:`propulate.Islands` (any ``ranks_per_worker``, 1 included). For each individual, on every
rank of its worker, it

- takes the worker's ``torch.distributed`` process group
  (:func:`~propulate.utils.distributed.init_worker_process_group`: NCCL with CUDA, gloo otherwise, created
  once per worker and reused) and, while the evaluation runs, sets the variables through which Accelerate
  (under the ``Trainer``) learns its distributed setup: ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and
  ``MASTER_PORT`` of the worker, ``LOCAL_RANK=0`` and ``LOCAL_WORLD_SIZE=1`` (each rank is a node of its own,
  as for Lightning) and ``ACCELERATE_TORCH_DEVICE``, the device the worker group placed this rank on. Without
  them Accelerate would read the MPI launcher's ``PMI_SIZE`` or ``OMPI_COMM_WORLD_SIZE``, the size of the
  whole job. Accelerate finds ``torch.distributed`` initialized and uses the worker's group instead of
  creating one; the ``Trainer`` leaves it alone at its end, so the next individual reuses it;
- trains with ``trainer.train()`` in a helper thread (:mod:`propulate.integrations.bridge`). The ``Trainer``
  saves a checkpoint after every evaluation (``save_strategy`` follows ``eval_strategy``) into the
  individual's evaluation folder (:func:`propulate.evaluation_checkpoint`); :class:`PropulateTrainerCallback`
  then reports the monitored metric as an interim loss, which commits that checkpoint and lets the surrogate
  prune, on every rank at the same evaluation (``control.should_training_stop``);
- continues an interrupted evaluation, in a later job, with ``trainer.train(resume_from_checkpoint=...)`` from
  the checkpoint committed last;
- returns the metric of the last evaluation as the loss.

transformers and accelerate are imported with this module; ``import propulate`` never imports them.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mpi4py import MPI

from ..checkpoint.evaluations import evaluation_checkpoint
from ..utils.distributed import METHODS, WorkerGroup, abort_worker_process_group
from .bridge import Reporter, follow_trainer, worker_group

try:
    import torch
    from transformers import Trainer, TrainerCallback, TrainingArguments
    from transformers.trainer_callback import PrinterCallback, ProgressCallback
except ImportError as err:  # pragma: no cover - depends on the installation
    raise ImportError(
        "propulate.integrations.hf_trainer needs Hugging Face transformers and accelerate: "
        f'pip install "propulate[transformers]" ({err})'
    ) from err

__all__ = ["RESERVED", "PropulateTrainerCallback", "hf_trainer_loss_fn", "worker_environment"]

#: ``TrainingArguments`` set by :func:`hf_trainer_loss_fn`, refused in ``training_args``: where checkpoints
#: go and when they are saved (after each evaluation, into the evaluation folder), the device and backend
#: (the worker's), and the best-model bookkeeping, whose checkpoint folders commits move.
RESERVED = (
    "output_dir",
    "save_strategy",
    "save_steps",
    "use_cpu",
    "ddp_backend",
    "local_rank",
    "load_best_model_at_end",
)
#: ``TrainingArguments`` whose default :func:`hf_trainer_loss_fn` changes (a ``training_args`` entry wins):
#: an evaluation (and so an interim loss) per epoch, no reports to experiment trackers from every rank of
#: every worker, no progress bars.
DEFAULTS: Mapping[str, Any] = {"eval_strategy": "epoch", "report_to": "none", "disable_tqdm": True}
MODES = ("min", "max")
#: The name of the ``Trainer``'s checkpoint folders, ``checkpoint-<global step>``.
CHECKPOINT_PREFIX = "checkpoint-"


class PropulateTrainerCallback(TrainerCallback):
    """Reports the monitored metric after each evaluation, once the ``Trainer`` saved its checkpoint.

    The ``Trainer`` calls :meth:`on_evaluate` with the evaluation's metrics (the same on every rank: it
    gathers them over the worker), then saves a checkpoint and calls :meth:`on_save`, where the metric is
    handed to propulate; a verdict to end the training sets ``control.should_training_stop``.
    :meth:`on_step_begin` ends a training that propulate ended before the next step (it raises ``Halted``).

    Parameters
    ----------
    reporter : Reporter
        The trainer thread's end of :func:`~propulate.integrations.bridge.follow_trainer`.
    monitor : str
        The metric that is the loss, as the ``Trainer`` names it (``"eval_loss"``, ``"eval_accuracy"``, ...).
    mode : {"min", "max"}
        ``"max"``: the metric is maximized, its negative is the loss.
    """

    def __init__(self, reporter: Reporter, monitor: str, mode: str) -> None:
        self.reporter = reporter
        self.monitor = monitor
        self.sign = 1.0 if mode == "min" else -1.0
        self._interim: dict[str, float] | None = None
        #: Evaluations reported in this attempt.
        self.reported = 0

    def on_step_begin(self, args: TrainingArguments, state: Any, control: Any, **kwargs: Any) -> None:
        """End the training before the step if propulate ended it."""
        self.reporter.check()

    def on_evaluate(
        self,
        args: TrainingArguments,
        state: Any,
        control: Any,
        metrics: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Keep the evaluation's metrics for the checkpoint saved next.

        Raises
        ------
        KeyError
            If ``monitor`` is not among the metrics, naming those that are.
        """
        values = {str(k): float(v) for k, v in (metrics or {}).items() if isinstance(v, (int, float))}
        if self.monitor not in values:
            raise KeyError(
                f"monitor={self.monitor!r}: the Trainer's evaluation gave no such metric; it gave "
                f"{sorted(values) or 'none'} (compute_metrics' names get the prefix 'eval_')"
            )
        loss = self.sign * values[self.monitor]
        values.pop("loss", None)
        self._interim = {"loss": loss, **values}

    def on_save(self, args: TrainingArguments, state: Any, control: Any, **kwargs: Any) -> Any:
        """Report the metrics of the evaluation just saved; stop the training if propulate says so."""
        interim, self._interim = self._interim, None
        if interim is None:  # a checkpoint without an evaluation (the Trainer's last, say): nothing to commit
            return control
        self.reported += 1
        if not self.reporter.report(interim):
            control.should_training_stop = True
        return control


def worker_environment(group: WorkerGroup) -> dict[str, str]:
    """Return the environment variables through which Accelerate takes the worker as its world.

    Parameters
    ----------
    group : WorkerGroup
        The worker's process group.

    Returns
    -------
    dict[str, str]
        ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` (0), ``LOCAL_WORLD_SIZE`` (1), ``MASTER_ADDR``,
        ``MASTER_PORT`` and ``ACCELERATE_TORCH_DEVICE``.
    """
    return {
        "RANK": str(group.rank),
        "WORLD_SIZE": str(group.world_size),
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "1",
        "MASTER_ADDR": group.master_addr,
        "MASTER_PORT": str(group.master_port),
        "ACCELERATE_TORCH_DEVICE": str(group.device),
    }


@contextmanager
def _environment(variables: Mapping[str, str]) -> Iterator[None]:
    """Set ``variables`` for the block, then put back what they held (or their absence)."""
    saved = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def hf_trainer_loss_fn(
    model_factory: Callable[[Mapping[str, Any]], torch.nn.Module],
    *,
    train_dataset: Any,
    eval_dataset: Any,
    training_args: Mapping[str, Any] | Callable[[Mapping[str, Any]], Mapping[str, Any]] | None = None,
    trainer_kwargs: Mapping[str, Any] | Callable[[Mapping[str, Any]], Mapping[str, Any]] | None = None,
    monitor: str = "eval_loss",
    mode: str = "min",
    method: str = "auto",
    timeout: datetime.timedelta = datetime.timedelta(minutes=10),
) -> Callable[..., Iterator[dict[str, float]]]:
    """Return a loss function that trains a model with Hugging Face's ``Trainer`` on the worker's ranks.

    The loss function, ``loss_fn(params, comm=MPI.COMM_SELF)``, is a generator: it yields the monitored metric
    after each evaluation of the ``Trainer`` (an interim loss, for the surrogates; it commits the checkpoint
    saved for it), and the last one is the individual's loss; the evaluation's other numbers travel along as
    metrics (``eval_runtime``, ``epoch``, ...). Pass it to :class:`propulate.Islands` with any
    ``ranks_per_worker``.

    Parameters
    ----------
    model_factory : callable (params) -> torch.nn.Module
        Builds the model of an individual from its parameters (a mapping, the :class:`propulate.Individual`),
        on every rank of the worker: a ``transformers`` model built from its configuration (or loaded from a
        local folder), or any module whose forward returns the loss as the ``Trainer`` expects.
    train_dataset, eval_dataset : dataset or callable (params) -> dataset
        The ``Trainer``'s training and evaluation data, the same for every individual or built from its
        parameters. The ``Trainer`` shards both over the worker's ranks.
    training_args : mapping or callable (params) -> mapping, optional
        Arguments of ``transformers.TrainingArguments`` (``learning_rate``, ``num_train_epochs``,
        ``per_device_train_batch_size``, ``eval_strategy``, ``eval_steps``, ...), or a function that returns
        them for an individual (the usual place for the learning rate). Not those in :data:`RESERVED`.
        Unless given here, the ``Trainer`` evaluates after every epoch, reports to no tracker and shows no
        progress bar (:data:`DEFAULTS`).
    trainer_kwargs : mapping or callable (params) -> mapping, optional
        Further arguments of ``transformers.Trainer`` (``data_collator``, ``compute_metrics``,
        ``processing_class``, ``callbacks``, ...), or a function that returns them for an individual.
    monitor : str
        The evaluation metric that is the loss (``"eval_loss"``, or ``"eval_<name>"`` for a metric of
        ``compute_metrics``).
    mode : {"min", "max"}
        Whether the metric is minimized or maximized (the loss is then its negative).
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
        If ``model_factory`` is not callable or ``training_args`` or ``trainer_kwargs`` is neither a mapping
        nor a callable.
    ValueError
        If ``mode`` or ``method`` is not an allowed value, if ``training_args`` sets a reserved argument or
        evaluates never (``eval_strategy="no"``), or ``trainer_kwargs`` sets ``args``, ``model`` or a
        dataset (naming it); in the loss function, if the training ended without an evaluation.
    KeyError
        In the loss function, on every rank, if the evaluation gives no metric ``monitor``.
    ImportError
        When this module is imported without transformers and accelerate.
    """
    if not callable(model_factory):
        raise TypeError(f"model_factory must be callable; got {type(model_factory).__name__}")
    if mode not in MODES:
        raise ValueError(f"mode must be 'min' or 'max'; got {mode!r}")
    if not isinstance(monitor, str) or not monitor:
        raise ValueError(f"monitor must be the name of an evaluation metric; got {monitor!r}")
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(repr(m) for m in METHODS)}; got {method!r}")
    if training_args is not None and not callable(training_args):
        _check_training_args(training_args)
    if trainer_kwargs is not None and not callable(trainer_kwargs):
        _check_trainer_kwargs(trainer_kwargs)

    def loss_fn(params: Mapping[str, Any], comm: MPI.Comm = MPI.COMM_SELF) -> Iterator[dict[str, float]]:
        group = worker_group(comm, method, timeout)
        arguments = dict(training_args(params) if callable(training_args) else training_args or {})
        _check_training_args(arguments)
        extra = dict(trainer_kwargs(params) if callable(trainer_kwargs) else trainer_kwargs or {})
        _check_trainer_kwargs(extra)
        checkpoint = evaluation_checkpoint()
        latest = checkpoint.latest
        resume_from = _saved_checkpoint(latest) if latest is not None else None
        arguments = {**DEFAULTS, **arguments}
        arguments.update(
            output_dir=str(checkpoint.path),
            save_strategy=arguments["eval_strategy"],
            use_cpu=torch.device(group.device).type == "cpu",
            ddp_backend=group.backend,
            ddp_timeout=int(timeout.total_seconds()),
        )
        if "eval_steps" in arguments:
            arguments["save_steps"] = arguments["eval_steps"]
        with _environment(worker_environment(group)):
            model = model_factory(params)
            train = train_dataset(params) if callable(train_dataset) else train_dataset
            evaluate = eval_dataset(params) if callable(eval_dataset) else eval_dataset
            trainer = Trainer(
                model=model,
                args=TrainingArguments(**arguments),
                train_dataset=train,
                eval_dataset=evaluate,
                **extra,
            )
            if group.rank != 0:  # the worker's first rank prints the Trainer's logs
                trainer.remove_callback(PrinterCallback)
                trainer.remove_callback(ProgressCallback)

            def fit(reporter: Reporter) -> None:
                callback = PropulateTrainerCallback(reporter, monitor, mode)
                trainer.add_callback(callback)
                trainer.train(resume_from_checkpoint=resume_from)
                if callback.reported == 0 and latest is None:
                    raise ValueError(
                        "the Trainer ended without an evaluation: nothing to report as the loss (check "
                        "eval_strategy, eval_steps and the evaluation data)"
                    )

            abandon = abort_worker_process_group if group.world_size > 1 else _nothing
            yield from follow_trainer(fit, abandon, name=f"propulate-hf-trainer-{MPI.COMM_WORLD.rank}")

    return loss_fn


def _check_training_args(arguments: Mapping[str, Any]) -> None:
    if not isinstance(arguments, Mapping):
        raise TypeError(f"training_args must be a mapping or a callable; got {type(arguments).__name__}")
    reserved = sorted(set(arguments) & set(RESERVED))
    if reserved:
        raise ValueError(
            f"training_args: {', '.join(reserved)} cannot be given: checkpoints are saved after every "
            "evaluation into the evaluation folder, on the worker's devices"
        )
    strategy = arguments.get("eval_strategy", DEFAULTS["eval_strategy"])
    if str(getattr(strategy, "value", strategy)) == "no":
        raise ValueError("training_args: eval_strategy='no' never evaluates: nothing to report as the loss")


def _check_trainer_kwargs(kwargs: Mapping[str, Any]) -> None:
    if not isinstance(kwargs, Mapping):
        raise TypeError(f"trainer_kwargs must be a mapping or a callable; got {type(kwargs).__name__}")
    taken = sorted(set(kwargs) & {"args", "model", "model_init", "train_dataset", "eval_dataset"})
    if taken:
        raise ValueError(f"trainer_kwargs: {', '.join(taken)} cannot be given: hf_trainer_loss_fn sets them")


def _saved_checkpoint(state: Path) -> str | None:
    """Return the ``Trainer``'s checkpoint folder inside a committed state (the newest one), if any."""
    found = sorted(
        (
            path
            for path in state.glob(f"{CHECKPOINT_PREFIX}*")
            if path.name[len(CHECKPOINT_PREFIX) :].isdigit()
        ),
        key=lambda path: int(path.name[len(CHECKPOINT_PREFIX) :]),
    )
    return str(found[-1]) if found else None


def _nothing() -> None:
    return None

"""The training workload: a model spec (presets or JSON) run as training steps on the communicator.

Forward/backward compute timed on the one clock, DDP-style bucketed gradient allreduce overlapped with backward,
MoE all-to-all on the critical path; reports step time, exposed communication share and link load.  Layer: uses
``sw.collectives`` and below; ``starpulse train`` (``sw.apps.train``) drives it.
"""

from .runner import RankWorkload, StepPlan, plan_step, run_workload
from .schedule import Bucket, StepTimes, account_step, plan_buckets
from .spec import PRESETS, ModelSpec, WorkloadSpecError, load_spec, resolve_for_world

__all__ = ["PRESETS", "Bucket", "ModelSpec", "RankWorkload", "StepPlan", "StepTimes", "WorkloadSpecError",
           "account_step", "load_spec", "plan_buckets", "plan_step", "resolve_for_world", "run_workload"]

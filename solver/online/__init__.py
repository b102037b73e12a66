"""Online control over slots: virtual queues, policies, charging, the controller loop, the
default V and the budget tracker, its saved state, run results and summaries, the comparison
of policies and the offline reference."""
from .charge import Charge, charge_plan
from .controller import rows_frame, run_online
from .result import OnlineRun
from .summary import summarise

__all__ = ["Charge", "OnlineRun", "charge_plan", "rows_frame", "run_online", "summarise"]

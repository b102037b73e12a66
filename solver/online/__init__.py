"""Online control over slots: virtual queues, policies, charging, the controller loop, its
saved state, run summaries, the comparison of policies and the offline reference."""
from .charge import Charge, charge_plan
from .controller import rows_frame, run_online
from .summary import summarise

__all__ = ["Charge", "charge_plan", "rows_frame", "run_online", "summarise"]

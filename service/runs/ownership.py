"""Who may change a run: the token that uploaded (or started) it, and, where the rule says so, an admin token.

One rule for every write to an existing run: a live run's appends (its creating token only), its finalize and a
run's notes and tags (its uploading token or an admin token). Anonymous callers exist only while the service is
open (no token in the database) and then hold every scope (service/auth/actions.py `ANONYMOUS`), so they pass as
an admin token would. A run uploaded anonymously (`uploaded_by` null) is then an admin token's to edit.

Belongs here: the rule and its 403. Which routes apply it is their actions' business.
"""

from __future__ import annotations

from fp8_policy.db.run_models import Run
from fp8_policy.service.auth.actions import Principal


def may_write(run: Run, caller: Principal, *, admin_too: bool) -> bool:
    """The run's own token always; an admin token too when `admin_too`."""
    return run.uploaded_by == caller.name or (admin_too and caller.scope == "admin")

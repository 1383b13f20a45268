"""The API service's settings role (``infersight serve``), composed of ``config.parts``.

The listener and its limits, the scheduled jobs, cost and report settings (shared with the CLI's
``infersight.cli.settings.Settings``) and the notifiers; the store's settings come from the CLI's
role. A role declares no field of its own (``tests/test_settings.py``).
"""

from __future__ import annotations

from infersight.config.parts import ApiPart, CostReportPart, JobsPart, NotifierPart


class ApiSettings(ApiPart, JobsPart, CostReportPart, NotifierPart):
    """What an API process reads: its listener, its jobs, prices and reports, its notifiers."""

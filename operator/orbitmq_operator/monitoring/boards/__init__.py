"""One module per dashboard, each with ``rows()``: its rows of :class:`~..panels.Panel`, top to
bottom (:data:`..dashboards.BOARDS` names and orders them)."""

"""The dashboard's view-models, one module a page: store answers → what the template shows.

Each module names its page (``NAME``, ``TITLE``, ``DEFAULT_RANGE``) and has
``page(app, ctx, query)``: the app's context, the page's ``Context`` and its query string in,
a plain dict out (charts already rendered to SVG by ``api.dashboard.charts``). A page that
refines the context (its own parameters, kept in links) returns it as ``ctx``. View modules do
not import each other: what pages share is in ``api.dashboard.shared`` and ``.formatting``.
"""

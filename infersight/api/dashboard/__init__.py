"""The web dashboard: server-rendered, read-only pages under ``/ui/``.

``routes`` (the pages, login and static assets) · ``context`` (a page's range, filters and
refresh, from the URL) · ``session`` (the browser's sign-in cookie) · ``charts`` (SVG made on
the server) · ``formatting`` (how values are written) · ``shared`` (chart buckets, filter menus)
· ``views/<page>.py``, one view-model a page. Templates and static assets are package data of
``dashboards``.
"""

"""Data only: the dashboard's Jinja2 templates and static assets, report templates and the
Grafana dashboard JSON. Nothing here imports another infersight package."""

"""Notifiers behind ``alerts.notify.Notifier``: Slack, PagerDuty Events v2, Alertmanager v2."""

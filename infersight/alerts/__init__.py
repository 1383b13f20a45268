"""Alerting: symptom → cause diagnosis, its rule pack, incidents' notifications.

Depends on ``core`` only; the API wires the store's signals and incidents into it.
"""

"""Celery tasks and the replica host that runs a stage engine on a device.

Workers import `stages`, never the control plane or Django: everything they report goes
out as `stages.protocol` messages and Redis keys.
"""

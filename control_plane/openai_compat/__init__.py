"""The OpenAI-compatible API under /v1 (async Django views).

Every request goes through `control_plane.orchestrator.serving.serve`, is checked by the
accounts app (key, scope, deployment allow-list, quota) and recorded as an
`inference.InferenceRequest` with its artifacts. Errors always answer OpenAI's shape.
"""

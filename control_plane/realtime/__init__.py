"""The OpenAI Realtime protocol (`/v1/realtime`) over a deployment's omni pipeline.

A Channels consumer (consumer.py) speaks the protocol; a session keeps its conversation,
its input audio buffer and at most one response at a time. Their life cycles are the
state machines of states.py (one table of allowed transitions).
"""

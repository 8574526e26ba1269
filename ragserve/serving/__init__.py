"""Serving: what a request does, apart from how it arrived.

Each service here takes a Principal and plain values and returns records or raises a
ServiceError; the HTTP routes (ragserve.server), the CLI and evaluation all call the same
service, so a permission rule or an id rule is written once. Nothing here knows HTTP.
"""

"""Progress lines and collected warnings: conversion takes minutes, and its warnings belong in the report."""

from __future__ import annotations

import logging

log = logging.getLogger("converters")


def step(message: str) -> None:
    """One progress line for a step that may take a while."""
    log.info(message)


class Warnings:
    """Warnings logged as they happen and kept for the report."""

    def __init__(self) -> None:
        self.items: list[str] = []

    def add(self, message: str) -> None:
        log.warning(message)
        self.items.append(message)

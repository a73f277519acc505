"""Vocabulary shared by every orbitmq role: names and their rules, errors, clocks, tasks."""

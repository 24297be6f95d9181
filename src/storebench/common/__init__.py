"""Foundations every layer may use: finding plug-ins by name, retries, secrets redaction, signal handling."""

"""forecasting/transformer."""

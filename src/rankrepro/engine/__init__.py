"""Training and evaluation loops."""

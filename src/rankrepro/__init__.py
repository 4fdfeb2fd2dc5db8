"""rankrepro: one pipeline that regenerates the tables of five rank-loss retrieval papers."""

__version__ = "0.1.0"

"""Datasets: download, verify, extract and turn into manifests."""

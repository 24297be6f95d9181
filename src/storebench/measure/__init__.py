"""What is measured beside the timed ops: HDR histograms and per-interval series, the machine's load, a server's resources."""

"""What a run wrote: typed records and the result files that hold them."""

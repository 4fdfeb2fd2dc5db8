"""Paper tables: specs (paper numbers + cell -> run mapping) and their rendering."""

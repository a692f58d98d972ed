"""`gpuanalyze fleet DIR|URL`: every run beneath a directory analysed, one table ranked by what its top fix saves."""

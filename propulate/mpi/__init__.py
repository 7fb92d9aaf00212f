"""MPI plumbing: who is which worker and island (layout) and how messages travel (messaging)."""

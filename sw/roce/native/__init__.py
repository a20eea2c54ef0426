"""Native (C, through cffi) pieces of the host NIC data path; the Python path stays the reference."""

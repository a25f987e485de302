"""Dashboard pages: one file each (register_page + layout + its callbacks)."""

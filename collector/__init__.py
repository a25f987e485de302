"""replayscope collector: ingest API, store, rollups, queries, alerts, metrics, importers."""

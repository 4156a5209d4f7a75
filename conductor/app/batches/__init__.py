"""Batches: the Batch API (`batch_api.Batches`: files, batches, finalize), reading an input file into jobs
on a worker (`ingest`), beat's sweep (`sweep`), repairing a batch's failed lines (`repair`), and the
chunked streaming in and out that CLI batches and Batch API reads share (`stream`).

Nothing is re-exported here: `conductor.app.service` imports `stream`, and `batch_api` imports the
service, so this package's import must not pull `batch_api` in."""

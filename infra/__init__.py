"""The foundation every other package stands on: storage, durable jobs, settings, serving,
the clock, logging and the telemetry plumbing. Imports nothing of the project above it."""

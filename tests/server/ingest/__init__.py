"""Tests of gradwatch_server.ingest (mirrors server/gradwatch_server/ingest/)."""

"""Tests of gradwatch_server.alerts (mirrors server/gradwatch_server/alerts/)."""

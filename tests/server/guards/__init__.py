"""Tests of gradwatch_server.guards (mirrors server/gradwatch_server/guards/)."""

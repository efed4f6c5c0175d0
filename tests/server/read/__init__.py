"""Tests of gradwatch_server.read (mirrors server/gradwatch_server/read/)."""

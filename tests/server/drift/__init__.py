"""Tests of gradwatch_server.drift (mirrors server/gradwatch_server/drift/)."""

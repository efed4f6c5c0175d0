"""Getting records to disk and to the server: the run writer, the crash-safe spool, the HTTP
sender, the wire-record builder, the local spool reader and job ids."""

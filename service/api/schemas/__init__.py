"""Request and response schemas, one module per resource: XCreate (request), XPublic, XsPublic (lists)."""

"""See the cluster: the live dashboard the runtime's own HTTP server serves, and the simulator's HTML report.

Both pages share one look and one charting script (`static/`): hand-written SVG charts, no library and no build
step. The dashboard is one HTML page (styles and scripts inlined, so nothing but the page and its JSON polls cross
the wire) that polls the API every second; the report is the same page kind with its data inlined, a single file
that opens from disk.

This package is the pages, their assets and the browser sessions, and imports neither `pollux.runtime` nor
`pollux.sim`: they hand it plain data (`pollux.runtime.views` the polls' JSON, `pollux.sim.report_html` the report's).
"""

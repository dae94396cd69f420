package main

import (
	"embed"
	"io/fs"
	"net/http"
)

// webFiles is the page: web/index.html and its scripts and styles,
// embedded so that the demo serves it with nothing fetched at run time.
//
//go:embed web
var webFiles embed.FS

// webHandler serves the page's files at /.
func webHandler() http.Handler {
	sub, err := fs.Sub(webFiles, "web")
	if err != nil {
		panic(err) // "web" is embedded: cannot happen
	}
	files := http.FileServerFS(sub)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Content-Security-Policy", "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:")
		files.ServeHTTP(w, r)
	})
}

package fleet

import (
	"fmt"
	"os"
	"testing"
)

// NginxMain returns an nginx.conf that runs in the foreground with its pid,
// logs and temporary files under dir and tmp, and includes include.
// accessLog, if set, is the access log's format (its file is
// dir/access.log).
func NginxMain(userLine, dir, tmp, include, accessLog string) string {
	logLine := fmt.Sprintf("access_log %s/access.log;", dir)
	if accessLog != "" {
		logLine = fmt.Sprintf("log_format lb '%s';\n    access_log %s/access.log lb;", accessLog, dir)
	}
	return fmt.Sprintf(`daemon off;
%s
worker_processes 2;
pid %[2]s/nginx.pid;
error_log %[2]s/error.log info;
events { worker_connections 256; }
http {
    %[5]s
    client_body_temp_path %[3]s/body;
    proxy_temp_path %[3]s/proxy;
    fastcgi_temp_path %[3]s/fastcgi;
    uwsgi_temp_path %[3]s/uwsgi;
    scgi_temp_path %[3]s/scgi;
    include %[4]s;
}
`, userLine, dir, tmp, include, logLine)
}

// HAProxyConfig returns examples/haproxy/haproxy.cfg (at path) with the
// servers, frontends and token of a test.
func HAProxyConfig(t testing.TB, path string, servers []string, grpcAddr, tcpAddr, token string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pairs := [][2]string{
		{`"Bearer TOKEN"`, `"Bearer ` + token + `"`},
		{"bind :8080 proto h2", "bind " + grpcAddr + " proto h2"},
		{"bind :7000", "bind " + tcpAddr},
	}
	for i, s := range servers {
		n := i + 1
		pairs = append(pairs,
			[2]string{fmt.Sprintf("server w%d 10.0.0.%d:7001 proto h2", n, n), fmt.Sprintf("server w%d %s proto h2", n, s)},
			[2]string{fmt.Sprintf("server w%d 10.0.0.%d:7001  ", n, n), fmt.Sprintf("server w%d %s  ", n, s)})
	}
	return Replace(t, string(b), pairs...)
}

// NginxGRPCConfig returns examples/nginx/grpc.conf (at path) with the
// servers and listening address of a test.
func NginxGRPCConfig(t testing.TB, path string, servers []string, listen string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pairs := [][2]string{{"listen 8080 http2;", "listen " + listen + " http2;"}}
	for i, s := range servers {
		pairs = append(pairs, [2]string{fmt.Sprintf("server 10.0.0.%d:7001 ", i+1), "server " + s + " "})
	}
	return Replace(t, string(b), pairs...)
}

package transport

// AcceptConn is Accept returning the *Conn type, for the tests.
func (l *Listener) AcceptConn() (*Conn, error) { return l.acceptConn() }

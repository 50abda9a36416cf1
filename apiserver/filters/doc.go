// Package filters wraps the API's handler in what every API request passes
// before its route: CORS, authentication and authorization, and the
// in-flight limits. A filter answers a request it refuses itself, with the
// Status error the server writes (the server alone negotiates its format),
// and keeps what it learns of a request where the server's audit log and
// metrics read it.
package filters

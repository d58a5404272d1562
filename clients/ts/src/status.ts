import type { Metadata } from "./wire.js";

/** Status code names, in snake case, indexed by their number (PROTOCOL.md, "Status codes"). */
export const CODES = [
  "ok",
  "canceled",
  "unknown",
  "invalid_argument",
  "deadline_exceeded",
  "not_found",
  "already_exists",
  "permission_denied",
  "resource_exhausted",
  "failed_precondition",
  "aborted",
  "out_of_range",
  "unimplemented",
  "internal",
  "unavailable",
  "data_loss",
  "unauthenticated",
] as const;

/** A status code name: "not_found", "unavailable", ... */
export type Code = (typeof CODES)[number];

/** The name of a numeric status code; unknown numbers are "unknown". */
export function codeName(n: number): Code {
  return CODES[n] ?? "unknown";
}

/** The number of a status code name. */
export function codeNumber(c: Code): number {
  return CODES.indexOf(c);
}

/**
 * StatusError is a call that ended with a status other than OK: one the
 * server sent, or one the client decided (a deadline, a cancellation, a
 * lost connection, a message over a limit).
 */
export class StatusError extends Error {
  /** The status code, in snake case: "not_found", "deadline_exceeded", ... */
  readonly code: Code;
  /** The error details, as the server sent them (encoded with the call's codec). */
  readonly details: Uint8Array[];
  /** Trailing metadata the server sent with the error. */
  readonly metadata: Metadata;
  /**
   * The call provably never ran (PROTOCOL.md, "Retry rule"): refused above
   * a GOAWAY's last stream id, or never sent because no connection could
   * be made. It may be sent again, whatever it does.
   */
  notProcessed: boolean;

  constructor(code: Code, message: string, details: Uint8Array[] = [], metadata: Metadata = [], options?: { cause?: unknown; notProcessed?: boolean }) {
    super(message, options);
    this.name = "StatusError";
    this.code = code;
    this.details = details;
    this.metadata = metadata;
    this.notProcessed = options?.notProcessed ?? false;
  }

  /** "not_found: no counter named a" */
  override toString(): string {
    return this.message ? `${this.code}: ${this.message}` : this.code;
  }
}

/**
 * Addresses, metadata and selectors: the plain shapes the host speaks.
 *
 * @module
 */

/** An object's address: `(kind, name)` inside the controller's cluster, shown as `kind/name`. */
export class ObjectKey {
  /**
   * @param {string} kind the object's kind
   * @param {string} name the object's name
   */
  constructor(kind, name) {
    /** The object's kind. @type {string} */
    this.kind = kind;
    /** The object's name. @type {string} */
    this.name = name;
    Object.freeze(this);
  }

  /**
   * True if `other` names the same object.
   *
   * @param {ObjectKey | null | undefined} other
   * @returns {boolean}
   */
  equals(other) {
    return other != null && other.kind === this.kind && other.name === this.name;
  }

  /** @returns {string} `kind/name` */
  toString() {
    return `${this.kind}/${this.name}`;
  }
}

/**
 * Labels, owner and finalizers of an object.
 *
 * `labels` maps each label key to its value (in key order); `owner` is the
 * object whose first delete request deletes this one too; `finalizers`
 * name the parties that must act before the object is removed. The host
 * checks the rules (`Invalid` on a breach): at most 32 labels and 16
 * finalizers, each spelled as `docs/contract.md` says.
 *
 * A `Metadata` is never changed in place: the builder methods return a new one.
 */
export class Metadata {
  /**
   * @param {{labels?: Record<string, string>, owner?: ObjectKey | null, finalizers?: string[]}} [parts]
   */
  constructor(parts = {}) {
    const labels = parts.labels ?? {};
    /** Label key to value, in key order. @type {Readonly<Record<string, string>>} */
    this.labels = Object.freeze(
      Object.fromEntries(Object.keys(labels).sort().map((k) => [k, labels[k]])),
    );
    /** The owning object, or null. @type {ObjectKey | null} */
    this.owner = parts.owner ?? null;
    /** Finalizer names, in the order given. @type {readonly string[]} */
    this.finalizers = Object.freeze([...(parts.finalizers ?? [])]);
    Object.freeze(this);
  }

  /**
   * A copy with label `key` set to `value`.
   *
   * @param {string} key
   * @param {string} value
   * @returns {Metadata}
   */
  label(key, value) {
    return new Metadata({ ...this.#parts(), labels: { ...this.labels, [key]: value } });
  }

  /**
   * A copy owned by `kind/name`.
   *
   * @param {string} kind
   * @param {string} name
   * @returns {Metadata}
   */
  ownedBy(kind, name) {
    return new Metadata({ ...this.#parts(), owner: new ObjectKey(kind, name) });
  }

  /**
   * A copy with finalizer `name` added (once: adding it again keeps one).
   *
   * @param {string} name
   * @returns {Metadata}
   */
  finalizer(name) {
    if (this.finalizers.includes(name)) return this;
    return new Metadata({ ...this.#parts(), finalizers: [...this.finalizers, name] });
  }

  /**
   * A copy without finalizer `name`.
   *
   * @param {string} name
   * @returns {Metadata}
   */
  withoutFinalizer(name) {
    return new Metadata({ ...this.#parts(), finalizers: this.finalizers.filter((f) => f !== name) });
  }

  /**
   * True if `other` has the same labels, owner and finalizers (in order).
   *
   * @param {Metadata | null | undefined} other
   * @returns {boolean}
   */
  equals(other) {
    if (other == null) return false;
    const a = Object.entries(this.labels);
    const b = Object.entries(other.labels);
    return (
      a.length === b.length &&
      a.every(([k, v], i) => b[i][0] === k && b[i][1] === v) &&
      (this.owner === null ? other.owner === null : this.owner.equals(other.owner)) &&
      this.finalizers.length === other.finalizers.length &&
      this.finalizers.every((f, i) => other.finalizers[i] === f)
    );
  }

  #parts() {
    return { labels: this.labels, owner: this.owner, finalizers: [...this.finalizers] };
  }
}

/**
 * Which objects `Api.listSelected` returns: those that carry every label
 * in `labels` with exactly the value given, and whose value contains
 * `contains` (a JSON-able value, compared as PostgreSQL's `jsonb @>`). The
 * empty selector selects every object.
 */
export class Selector {
  /**
   * @param {Record<string, string>} [labels]
   * @param {{value: any} | null} [contains] the containment condition, boxed (`null`: none)
   */
  constructor(labels = {}, contains = null) {
    /** Labels the object must carry. @type {Readonly<Record<string, string>>} */
    this.labels = Object.freeze({ ...labels });
    /** The value the object's value must contain, boxed; null when not given. @type {{value: any} | null} */
    this.contains = contains;
    Object.freeze(this);
  }

  /**
   * The empty selector: every object of the kind.
   *
   * @returns {Selector}
   */
  static everything() {
    return new Selector();
  }

  /**
   * A copy that also requires label `key` to be `value`.
   *
   * @param {string} key
   * @param {string} value
   * @returns {Selector}
   */
  label(key, value) {
    return new Selector({ ...this.labels, [key]: value }, this.contains);
  }

  /**
   * A copy that requires the object's value to contain `value` (`null` is JSON null, a real condition).
   *
   * @param {any} value
   * @returns {Selector}
   */
  containing(value) {
    return new Selector(this.labels, { value });
  }

  /**
   * `contains` as compact JSON text, or null when not given.
   *
   * @returns {string | null}
   */
  containsJson() {
    return this.contains === null ? null : JSON.stringify(this.contains.value);
  }
}

/**
 * An object as the host returns it, value and status as JSON text.
 *
 * @typedef {object} RawObject
 * @property {string} kind
 * @property {string} name
 * @property {number} version
 * @property {string} value JSON text
 * @property {Metadata} metadata
 * @property {string | null} status JSON text, or null
 * @property {number} generation
 * @property {number | null} deletingSinceMs ms since the Unix epoch, or null
 */

/**
 * A page of raw objects and the cursor of the next page, if any.
 *
 * @typedef {object} RawPage
 * @property {RawObject[]} objects
 * @property {string | null} next
 */

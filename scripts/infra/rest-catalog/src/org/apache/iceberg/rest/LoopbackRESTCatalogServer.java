package org.apache.iceberg.rest;

import java.net.InetSocketAddress;
import java.util.HashMap;
import java.util.Map;
import org.apache.hadoop.conf.Configuration;
import org.apache.iceberg.CatalogUtil;
import org.apache.iceberg.catalog.Catalog;
import org.eclipse.jetty.server.Server;
import org.eclipse.jetty.server.handler.gzip.GzipHandler;
import org.eclipse.jetty.servlet.ServletContextHandler;
import org.eclipse.jetty.servlet.ServletHolder;

/** Usage: LoopbackRESTCatalogServer HOST PORT [key=value ...] */
public final class LoopbackRESTCatalogServer {
  private LoopbackRESTCatalogServer() {}

  public static void main(String[] args) throws Exception {
    String host = args[0];
    int port = Integer.parseInt(args[1]);
    Map<String, String> props = new HashMap<>(RCKUtils.environmentCatalogConfig());
    for (int i = 2; i < args.length; i++) {
      String[] kv = args[i].split("=", 2);
      props.put(kv[0], kv[1]);
    }
    props.putIfAbsent("catalog-impl", "org.apache.iceberg.jdbc.JdbcCatalog");
    props.putIfAbsent("uri", "jdbc:sqlite::memory:");
    props.putIfAbsent("jdbc.schema-version", "V1");
    if (!props.containsKey("warehouse")) throw new IllegalArgumentException("warehouse=... is required");
    String name = props.getOrDefault("catalog.name", "rest_backend");
    Catalog catalog = CatalogUtil.buildIcebergCatalog(name, props, new Configuration());

    RESTCatalogServer.CatalogContext ctx = new RESTCatalogServer.CatalogContext(catalog, props);
    RESTCatalogServlet servlet = new RESTCatalogServlet(new RESTServerCatalogAdapter(ctx));
    ServletContextHandler context = new ServletContextHandler(ServletContextHandler.NO_SESSIONS);
    context.addServlet(new ServletHolder(servlet), "/*");
    context.insertHandler(new GzipHandler());
    Server server = new Server(new InetSocketAddress(host, port));
    server.setHandler(context);
    server.start();
    System.out.println("REST catalog listening on http://" + host + ":" + port);
    System.out.flush();
    server.join();
  }
}
